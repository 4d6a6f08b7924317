"""Prometheus rules defined once: recording rules, alert groups, rule names and the rule file."""

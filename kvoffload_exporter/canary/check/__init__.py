"""The `check` command's run, sweep, advice, diagnosis and reports (text, JSON, PNG, evidence bundle)."""

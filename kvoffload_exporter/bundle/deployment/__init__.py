"""What a deployment reads: Kubernetes and compose files, the sharded Prometheus jobs, the jsonnet mixin."""

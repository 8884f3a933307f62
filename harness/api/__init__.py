"""`tickwork serve`: the HTTP API, Prometheus metrics and the operator dashboard."""

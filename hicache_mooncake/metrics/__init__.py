"""Metrics: each process's Prometheus series (a backend rank, a memory node), the HTTP exporter
that serves them, the discovery files that find every exporter of a host, and the scraper that reads them back."""

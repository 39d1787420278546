"""Monitoring: the cycle's exporter (`rtrl metrics`), the Prometheus scrape configuration of a deployment, the alert
rules (alerts.yml, tested by alerts_test.yml with `promtool test rules`) and `rtrl status` (docs/monitoring.md)."""

"""The Prometheus sink: counters kept in memory, gauges read from the store at scrape time."""

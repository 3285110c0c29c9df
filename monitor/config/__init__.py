"""Settings, schema, cron, baseline scope and the check plan: everything decided before a check runs."""

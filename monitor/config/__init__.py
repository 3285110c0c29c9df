"""Settings, schema, cron and baseline scope: everything that is decided before a check runs."""

"""The long-running process: composition root, scheduler, isolated check children."""

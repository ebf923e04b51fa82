"""``@background_task``: named work, its registry in this process, and its
schedules."""

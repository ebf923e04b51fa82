"""A site's own formats (``FORMAT_MODULE_PATH``), for the admin's dates tests."""

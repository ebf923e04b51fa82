"""The operator layer: what the admin, the JSON API and the ``bgtasks`` command do,
written once (start, cancel, release, prune), who may do it, and its words."""

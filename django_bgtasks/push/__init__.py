"""Pushed changes: every change of a lease, reported to what watches it in this
process."""

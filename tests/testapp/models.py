"""Models the tests write to under a lease: the "data" that fencing protects."""

from __future__ import annotations

from django.db import models


class Counter(models.Model):
    """A counter that holders increment inside ``lease.fence()``."""

    name = models.CharField(max_length=50, primary_key=True)
    value = models.BigIntegerField(default=0)


class LedgerEntry(models.Model):
    """One committed fenced write: who wrote it, with which token, and when
    (by the database clock), so that overlaps can be checked afterwards."""

    counter = models.CharField(max_length=50)
    owner = models.CharField(max_length=200)
    token = models.BigIntegerField()
    value = models.BigIntegerField()
    began_at = models.DateTimeField()
    ended_at = models.DateTimeField()

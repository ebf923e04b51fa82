"""The lease core: the lease operations (``BackgroundTask.objects``), the states
they hand back, and the holders that keep a lease while its work runs."""

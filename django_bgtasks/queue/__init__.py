"""Django Tasks on a lease: the backend (``LeaseBackend``), its queue's operations
(``QueuedTask.objects``), and running one claimed task."""

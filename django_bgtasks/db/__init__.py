"""All of django-bgtasks' SQL, and nothing else runs any: the rules every
statement keeps (``rules``), one module per vendor (``postgresql``,
``sqlite``, ``mysql``), where they are rendered and run (``vendors``), the
prepared-statement cursor (``cursor``), the server probes the checks need
(``probes``), and riding out an outage (``outages``)."""

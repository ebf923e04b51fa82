"""All of django-bgtasks' SQL, and nothing else runs any: one package per
engine (``postgresql``, ``mysql``, ``sqlite``), each its statements and its
driver (how it runs them: ``driver`` says what one is); what every engine
shares (``shared``); where a connection's driver is picked and the
statements rendered and run (``engines``); the prepared-statement cursor
(``cursor``), result rows (``rows``), and riding out an outage (``outages``)."""

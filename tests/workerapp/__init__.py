"""Tasks for the worker tests, installed only where a test asks for them
(the worker processes, and the in-process worker tests), so that the
surfaces' listings of registered tasks stay those of tests.testapp."""

"""English as this test site writes it: a DATETIME_FORMAT with seconds,
microseconds, the time zone's name and the ISO week, so that the admin's
times (and live.js's) can be told apart to the microsecond."""

DATETIME_FORMAT = r"l jS \o\f F Y, H:i:s.u T, \w\e\e\k W"

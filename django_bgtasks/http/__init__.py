"""The HTTP surfaces: the JSON status API and the event stream, and what they
share."""

"""The ``bgtasks`` management command: thin adapters over the library, and drawing
on a terminal."""

"""Only Beam: the PTransforms that read, encode, shuffle and write (convert), their coders,
the runner fixes, worker staging, the progress feed and read-ahead. Imports every etl package;
only cli imports it."""

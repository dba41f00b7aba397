"""All file and bucket access: `fs` (local paths and every Beam file system behind one
seam) and `object_store` (gs:// preconditions, generations, bounded retries).
Imports only etl.base.
"""

"""Memory in and out: `Array`, DLPack, the buffer reader and the one intake door.

The lowest wing: it imports no other wing of the package.
"""

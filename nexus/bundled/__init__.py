"""The bundled capsules (`nexus.bundled`): the `.kip` files every new database starts from.

Data only; they are applied by `nexus.ops.capsules` (bootstrap, `load_capsules`). See README.md.
"""

"""Operations over an open engine: capsules (bootstrap, loading), bulk import, export,
integrity check and repair, and the request audit log. Each is a module over
`nexus.engine.Engine`; `nexus.api.Nexus` offers them as methods."""

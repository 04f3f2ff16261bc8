"""Everything that touches Redis: key names, connections, Lua scripts, typed operations."""

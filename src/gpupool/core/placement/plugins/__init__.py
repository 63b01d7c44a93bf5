"""Built-in placement plugins, one policy per module."""

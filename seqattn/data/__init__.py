"""Built-in datasets, readers for custom files and DataModules."""

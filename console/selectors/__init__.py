"""Reads for the console pages: QuerySets and small functions, never a write."""

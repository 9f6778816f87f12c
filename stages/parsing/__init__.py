"""Bytes to pages, sections and images: the parser process (worker side and child) and one reader
per format."""

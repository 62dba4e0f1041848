"""Spark jobs over raftlog topics (pageviews.py: the page-view pipeline)."""

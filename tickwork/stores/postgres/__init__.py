"""The shared job table on PostgreSQL (psycopg 3): the store and its group commit."""

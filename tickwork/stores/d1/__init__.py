"""The shared job table on Cloudflare D1: the binding's edge and the store."""

"""What a GDN layer runs on, described without torch: heads, packed lengths, pack streams, models, layer setup."""

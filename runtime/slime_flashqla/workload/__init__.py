"""What a GDN layer runs on, described without torch: head configurations, lengths, packs and the layer setup."""

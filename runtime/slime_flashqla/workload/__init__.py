"""What a GDN layer runs on, described without torch: head configurations, shared by every command."""

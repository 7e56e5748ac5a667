"""What ships and how it is vouched for: shipped-file lists, signing, the generated JSON reference page."""

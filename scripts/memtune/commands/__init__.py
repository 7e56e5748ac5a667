"""One module per helper script: argument parsing and output, no arithmetic."""

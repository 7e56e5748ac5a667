"""The launch-script reader, split by job: script (records), budget, lexer, expansion, commands, args."""

"""What every stage uses: user-facing errors, atomic state files, the records rocmforge writes and reads
back, and YAML that remembers where each key came from."""

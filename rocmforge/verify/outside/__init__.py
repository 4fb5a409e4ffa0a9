"""The verdict from outside the image: its files read from its layers on the host, and accounted
for from sources the image cannot edit."""

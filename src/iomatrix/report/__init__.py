"""Reports read only the store; statistics come from iomatrix.stats."""

"""The app in Chromium (/usr/bin/chromium through Playwright), as a person uses it."""

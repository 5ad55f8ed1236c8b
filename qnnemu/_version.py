"""The package version; baked into libQnnHtpEmu.so at build time and checked when it loads."""
__version__ = "0.1.0"

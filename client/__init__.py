"""The asyncio client SDK: producers, push and lite-pull consumers, transactions, admin."""

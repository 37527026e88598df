"""Services beside the actors: the policy of a turn (create, continue, keep) and compaction
with the model, written against actor handles and the pure `responses` layer."""

"""The model engine's wing: layer descriptions (`layers`) and a model's checked spec (`spec`):
shapes of any rank, the flat parameter layout under torch's names, the seeded initialization
and the JSON record (issue "Models beyond the MLP")."""

"""trainwreck's harness: launch a script across ranks the way torchrun does and observe every rank
from outside it. Importing this package does not import torch."""

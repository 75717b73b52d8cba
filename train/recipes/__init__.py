"""Published ImageNet recipes, reproducible by name: `train-imagenet --recipe NAME` (docs/recipes.md).

Data only (it imports nothing from the trainer or the loader). A recipe is a record (`record.Recipe`:
named values, each with its source line), one module per family: `ffcv` (FFCV's ResNet-50/18
table), `torchvision` (ResNet-50 v1 and v2), `rsb` (ResNet Strikes Back A3). `registry` finds them by
name. The trainer reads them: `trainer/recipe.py` turns one into a run's config (explicit flags win
and are recorded as overrides; the lr follows the world size by the recipe's rule) and a config back
into the resolved JSON that `--show` prints and a run writes to RUN_DIR/recipe.json.
"""

from imagenet_shards.train.recipes.record import Cited, Recipe
from imagenet_shards.train.recipes.registry import RECIPES, UnknownRecipe, get_recipe, recipe_names

__all__ = ["Cited", "RECIPES", "Recipe", "UnknownRecipe", "get_recipe", "recipe_names"]

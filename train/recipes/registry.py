"""Every recipe by name. Adding one is adding a record to a family module and listing the module here."""

from __future__ import annotations

from imagenet_shards.train.recipes import ffcv, rsb, torchvision
from imagenet_shards.train.recipes.record import Recipe

RECIPES: dict[str, Recipe] = {r.name: r for family in (ffcv, torchvision, rsb) for r in family.RECIPES}


class UnknownRecipe(KeyError):
    """A --recipe name that is not in the registry; str() is the one-line message."""

    def __str__(self) -> str:
        return self.args[0]


def recipe_names() -> list[str]:
    """The known recipe names, in registry order (family by family)."""
    return list(RECIPES)


def get_recipe(name: str) -> Recipe:
    """The recipe called `name`; UnknownRecipe (listing the known names) otherwise."""
    try:
        return RECIPES[name]
    except KeyError:
        raise UnknownRecipe(f"unknown --recipe {name!r}; known recipes: {', '.join(RECIPES)}") from None

from django import template

register = template.Library()


@register.filter
def kind_label(value: str) -> str:
    """``procedure_refinement`` -> ``procedure refinement``."""
    return str(value).replace("_", " ")

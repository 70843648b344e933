"""What the settings' forms share: a number shown as typed, and one typed in a unit shown beside its input."""

from decimal import Decimal

from django import forms
from django.utils.html import format_html


class NumberInput(forms.NumberInput):
    """A number input that shows a whole number without a decimal point ("7", not "7.0")."""

    def format_value(self, value):
        """Any other number as Python writes it back exactly ("0.0043"), never in exponent form."""
        if isinstance(value, float):
            text = repr(value)
            return text.removesuffix(".0") if "e" not in text else format(Decimal(text), "f")
        return super().format_value(value)


class UnitInput(NumberInput):
    """A number input with its unit beside it ("s", "%", "min", "days"): <input …> <span class="unit">s</span>.

    The unit's element is `<id>-unit`, so that a page's script can say another unit when the input's meaning
    changes (an alert rule's condition); the input names it in aria-describedby, so that it is read with it.
    """

    def __init__(self, unit: str = "", attrs: dict | None = None):
        super().__init__({"step": "any", **(attrs or {})})
        self.unit = unit

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        widget_attrs = context["widget"]["attrs"]
        if widget_attrs.get("id"):
            described = widget_attrs.get("aria-describedby", "")
            widget_attrs["aria-describedby"] = f"{described} {widget_attrs['id']}-unit".strip()
        return context

    def render(self, name, value, attrs=None, renderer=None):
        html = super().render(name, value, attrs, renderer)
        element = (attrs or {}).get("id") or self.attrs.get("id") or f"id_{name}"
        return format_html(
            '<span class="with-unit">{}<span class="unit" id="{}-unit">{}</span></span>', html, element, self.unit
        )

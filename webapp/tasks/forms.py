from __future__ import annotations

from django import forms


class AddTaskForm(forms.Form):
    project = forms.CharField(max_length=120, help_text="a project where you are a reviewer or owner, or a new name")
    archive = forms.FileField(required=False, label="Task folder as a zip",
                              help_text="Problem.md, the data files and evaluate.py, zipped (a zip of the folder "
                                        "itself is fine)")
    path = forms.CharField(required=False, max_length=1000, label="or a folder on the server",
                           help_text="only under the folders the studio allows (TRELLIS_TASK_ROOTS)")

    def clean(self):
        data = super().clean()
        if bool(data.get("archive")) == bool((data.get("path") or "").strip()):
            raise forms.ValidationError("Upload a zip or name a folder on the server (one of the two).")
        return data

"""`/api/telegram/register-webhook`: point the bot's webhook at this service."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()

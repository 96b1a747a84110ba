"""Log compaction (Kafka's log cleaner): offset map, cleaning passes, manager and threads."""

from .cleaner import Cleaner, CleanerStats, CleanJob, LogCleaningAbortedError
from .cleaner_manager import LogCleanerManager
from .log_cleaner import CleanerConfig, CleanerMetrics, LogCleaner
from .offset_map import SkimpyOffsetMap

__all__ = [
    "Cleaner", "CleanerConfig", "CleanerMetrics", "CleanerStats", "CleanJob", "LogCleaner",
    "LogCleanerManager", "LogCleaningAbortedError", "SkimpyOffsetMap",
]

"""Audio: speech as a sequence of frames cut by a sliding window.

- :mod:`~seqattn.modalities.audio.features`: reading audio, framing, raw / log-mel / MFCC frame features;
- :mod:`~seqattn.modalities.audio.adapter`: :class:`AudioAdapter` (waveform -> Tokens);
- :mod:`~seqattn.modalities.audio.manifest`: manifests and label files (``file:line`` errors);
- :mod:`~seqattn.modalities.audio.data`: :class:`SpeechDataModule` (frame labels);
- :mod:`~seqattn.modalities.audio.corpus`: the built-in synthetic speech corpus;
- :mod:`~seqattn.modalities.audio.viz`: the figure of one test utterance;
- :mod:`~seqattn.modalities.audio.clips`: :class:`ClipDataModule` (one label per clip: words, speakers);
- :mod:`~seqattn.modalities.audio.words`: the built-in spoken-word corpus (anagram groups);
- :mod:`~seqattn.modalities.audio.augment`: training-only augmentation (:class:`AugmentedAudioAdapter`);
- :mod:`~seqattn.modalities.audio.reference`: the MFCC + logistic-regression reference for clips.
"""

from seqattn.modalities.audio.adapter import AudioAdapter
from seqattn.modalities.audio.features import AudioFeatures, frame_labels, load_audio, num_frames

__all__ = ["AudioAdapter", "AudioFeatures", "frame_labels", "load_audio", "num_frames"]

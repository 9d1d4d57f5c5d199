"""A twenty-eighth blind set of sick scenarios (the 'blind28' split), written without reading the
doctor, its policies, forensics or notes, or the other sick files (sick_blind25.py read for its
format only): each is the set-up and symptom of public user reports (cited in its docstring) on
an architecture no other registry entry uses (an OverFeat-lite, a cnn-trad-fpool3 keyword
spotter, a magic-wand gesture CNN, a HybridSN-lite, an ECG 1-D ResNet-lite, a concrete-strength
DNN, a LeNet-300-100, a Basenji-lite, a DNN regressor and a Caffe cifar10_quick-lite). Each
builder takes `cured`: the same run with the thread's remedy (the registry calls
`build(seed)`, the sick run). Each was checked with plain Keras `compile` + `fit` only: the sick
run shows the reported symptom (seeds 0 and 1), the cured twin passes runner's "did it train"
measure in the same number of steps (seed 0)."""

import keras
import numpy as np
import tensorflow as tf

from scripts.calibration import cases
from scripts.calibration import data
from scripts.calibration import field

BLIND28 = cases.Registry()
SCE = keras.losses.SparseCategoricalCrossentropy
L = keras.layers

_seed = keras.utils.set_random_seed


def add(name, expected, arch, **fields):
  """`BLIND28.add` with split='blind28'."""
  return BLIND28.add(name, expected, arch, split='blind28', **fields)


# --- Layers, architectures and data of this file (in the order of the scenarios). ------------


def overfeat_lite(seed, *, size=32, classes=10):
  """An OverFeat-lite (Sermanet et al., 2014, the 'fast' model in miniature): a 5x5 convolution
  of 32 with stride 2, 2x2 max pooling, a 3x3 convolution of 64, 2x2 max pooling, three 3x3
  convolutions (96, 96, 64), 2x2 max pooling, two Dense(256, ReLU) with dropout 0.5,
  Dense(`classes`): the logits. ReLU throughout, no normalisation (as the original)."""
  _seed(seed)
  x = keras.Input((size, size, 3))
  h = L.Conv2D(32, 5, strides=2, padding='same', activation='relu')(x)
  h = L.MaxPooling2D()(h)
  h = L.MaxPooling2D()(L.Conv2D(64, 3, padding='same', activation='relu')(h))
  for n in (96, 96, 64):
    h = L.Conv2D(n, 3, padding='same', activation='relu')(h)
  h = L.Flatten()(L.MaxPooling2D()(h))
  for _ in range(2):
    h = L.Dropout(0.5)(L.Dense(256, activation='relu')(h))
  return keras.Model(x, L.Dense(classes)(h), name='overfeat_lite')


def keyword_spectrograms(seed, *, rows=2048, frames=32, bins=20, words=6):
  """Spoken keywords in miniature (the Speech Commands set as a keyword spotter reads it): log
  mel spectrograms (`frames` x `bins`) of background noise with a word's formant pattern (each
  keyword a fixed sequence of three formant pairs, drawn at a random onset and speaking rate).
  (spectrogram (rows, frames, bins, 1), keyword id)."""
  rng = np.random.RandomState(seed)
  pattern = rng.randint(1, bins - 1, (words, 3, 2))
  y = rng.randint(0, words, rows)
  x = rng.normal(0.0, 0.5, (rows, frames, bins))
  for i in range(rows):
    start = rng.randint(0, frames // 3)
    seg = rng.randint(4, 7)
    for k in range(3):
      for f in pattern[y[i], k]:
        x[i, start + k * seg:start + (k + 1) * seg, f - 1:f + 2] += rng.uniform(1.5, 2.5)
  return x[..., None].astype(np.float32), y.astype(np.int32)


def cnn_trad_fpool3_lite(seed, *, frames=32, bins=20, words=6):
  """A cnn-trad-fpool3-lite (Sainath & Parada, 2015, the keyword spotter of TensorFlow's
  speech_commands example): a 20x8 (time x frequency; here 8x4) convolution of 32 (ReLU), 1x3
  max pooling in frequency, a 10x4 (here 4x4) convolution of 32 (ReLU), dropout 0.5,
  Dense(`words`): the logits."""
  _seed(seed)
  x = keras.Input((frames, bins, 1))
  h = L.Conv2D(32, (8, 4), padding='same', activation='relu')(x)
  h = L.MaxPooling2D((1, 3))(L.Dropout(0.5)(h))
  h = L.Dropout(0.5)(L.Conv2D(32, (4, 4), padding='same', activation='relu')(h))
  return keras.Model(x, L.Dense(words)(L.Flatten()(h)), name='cnn_trad_fpool3_lite')


def wand_gestures(seed, *, rows=2048, window=64, gestures=4):
  """Accelerometer gestures in miniature (the TensorFlow Lite Micro magic-wand data): three
  axes in milli-g as the board's driver reports them (gravity about 1000 on one axis, noise
  of 30), each gesture (a wing, a ring, a slope, none) a trajectory of its own shape, speed and
  amplitude (400 to 900 milli-g). (window (rows, window, 3), gesture id)."""
  rng = np.random.RandomState(seed)
  y = rng.randint(0, gestures, rows)
  t = np.linspace(0, 1, window)
  x = rng.normal(0.0, 30.0, (rows, window, 3))
  x[:, :, 2] += 1000.0
  for i in range(rows):
    a = rng.uniform(400, 900)
    s = rng.uniform(0.8, 1.2)
    ph = rng.uniform(0, 0.3)
    if y[i] == 0:
      x[i, :, 0] += a * np.sign(np.sin(2 * np.pi * 2 * s * (t + ph)))
      x[i, :, 1] += a * 0.5 * np.abs(np.sin(2 * np.pi * 2 * s * (t + ph)))
    elif y[i] == 1:
      x[i, :, 0] += a * np.cos(2 * np.pi * s * (t + ph))
      x[i, :, 1] += a * np.sin(2 * np.pi * s * (t + ph))
    elif y[i] == 2:
      x[i, :, 1] += a * (2 * t - 1) * s
      x[i, :, 0] -= a * 0.5 * (t > 0.5)
  return x.astype(np.float32), y.astype(np.int32)


def magic_wand_lite(seed, *, window=64, gestures=4, naive=True):
  """A magic-wand gesture CNN (TensorFlow Lite Micro's magic_wand model): a 4x3 convolution of
  8 over (time, axis) (ReLU), 3x3 max pooling, dropout 0.1, a 4x1 convolution of 16 (ReLU), 3x1
  max pooling, dropout 0.1, Dense(16, ReLU), dropout 0.1, Dense(`gestures`) and a softmax:
  written exp(z) / sum(exp(z)) (`naive`, the threads' own softmax), otherwise tf.nn.softmax.
  The gesture's probabilities."""
  _seed(seed)
  x = keras.Input((window, 3))
  h = L.Reshape((window, 3, 1))(x)
  h = L.MaxPooling2D((3, 3), padding='same')(L.Conv2D(8, (4, 3), padding='same',
                                                      activation='relu')(h))
  h = L.Dropout(0.1)(h)
  h = L.MaxPooling2D((3, 1), padding='same')(L.Conv2D(16, (4, 1), padding='same',
                                                      activation='relu')(h))
  h = L.Dropout(0.1)(L.Dense(16, activation='relu')(L.Flatten()(L.Dropout(0.1)(h))))
  z = L.Dense(gestures)(h)
  if naive:
    out = L.Lambda(lambda t: tf.exp(t) / tf.reduce_sum(tf.exp(t), -1, keepdims=True))(z)
  else:
    out = L.Lambda(lambda t: tf.nn.softmax(t, -1))(z)
  return keras.Model(x, out, name='magic_wand_lite')


def hyperspectral_patches(seed, *, rows=2048, size=9, bands=30, classes=6, nodata=0.02,
                          fill=False):
  """Hyperspectral land-cover patches in miniature (the Indian Pines layout HybridSN reads,
  after PCA to `bands` components): each class a spectral signature, each pixel its class's
  or a neighbour class's signature plus noise, the label the centre pixel's class. A fraction
  `nodata` of the pixels lie outside the sensor's swath and hold NaN (a GeoTIFF's no-data
  value as rasterio reads it); `fill`: those replaced by 0 (the threads' remedy).
  (patch (rows, size, size, bands), class id)."""
  rng = np.random.RandomState(seed)
  sig = rng.normal(0.0, 1.0, (classes, bands))
  y = rng.randint(0, classes, rows)
  other = rng.randint(0, classes, rows)
  mask = rng.rand(rows, size, size) < 0.6
  labels = np.where(mask, y[:, None, None], other[:, None, None])
  x = sig[labels] + rng.normal(0.0, 0.8, (rows, size, size, bands))
  x[rng.rand(rows, size, size) < nodata] = np.nan
  if fill:
    x = np.nan_to_num(x, nan=0.0)
  return x.astype(np.float32), y.astype(np.int32)


def hybridsn_lite(seed, *, size=9, bands=30, classes=6):
  """A HybridSN-lite (Roy et al., 2019): three 3-D convolutions over (height, width, spectrum)
  (8 of 3x3x7, 16 of 3x3x5, 32 of 3x3x3; ReLU), the spectral axis folded into channels, a 3x3
  2-D convolution of 64 (ReLU), Dense(128, ReLU), dropout 0.4, Dense(`classes`): the logits."""
  _seed(seed)
  x = keras.Input((size, size, bands))
  h = L.Reshape((size, size, bands, 1))(x)
  for n, k in ((8, 7), (16, 5), (32, 3)):
    h = L.Conv3D(n, (3, 3, k), activation='relu')(h)
  h = L.Reshape((h.shape[1], h.shape[2], h.shape[3] * h.shape[4]))(h)
  h = L.Conv2D(64, 3, activation='relu')(h)
  h = L.Dropout(0.4)(L.Dense(128, activation='relu')(L.Flatten()(h)))
  return keras.Model(x, L.Dense(classes)(h), name='hybridsn_lite')


def ecg_beats(seed, *, rows=2048, length=256, classes=4):
  """Single-lead ECG rhythms in miniature (the arrhythmia task of Hannun et al.): a beat
  template (P wave, QRS complex, T wave) repeated at a rhythm of its class (normal, fast,
  irregular, with premature wide beats), baseline wander and noise. (signal (rows, length, 1),
  class id)."""
  rng = np.random.RandomState(seed)
  t = np.arange(length)
  y = rng.randint(0, classes, rows)
  x = np.zeros((rows, length), np.float32)

  def beat(c, wide=False):
    w = 6.0 if wide else 2.0
    return (0.15 * np.exp(-((t - c + 18) / 5.0) ** 2) + np.exp(-((t - c) / w) ** 2) -
            0.2 * np.exp(-((t - c - 4) / w) ** 2) + 0.3 * np.exp(-((t - c - 30) / 8.0) ** 2))

  for i in range(rows):
    period = {0: 60, 1: 36, 2: 55, 3: 60}[y[i]] * rng.uniform(0.9, 1.1)
    c = rng.uniform(0, period)
    while c < length + 40:
      wide = y[i] == 3 and rng.rand() < 0.4
      x[i] += beat(c, wide)
      c += period * (rng.uniform(0.5, 1.5) if y[i] == 2 else 1.0) * (0.7 if wide else 1.0)
    x[i] += 0.2 * np.sin(2 * np.pi * t / rng.uniform(150, 400) + rng.uniform(0, 6))
    x[i] += rng.normal(0.0, 0.05, length)
  return x[..., None], y.astype(np.int32)


class NaNOnceAt(field.OneOffFault):
  """`field.OneOffFault` on element 3 of the activations, NaN (a kernel or a buffer that
  misfires once)."""

  def __init__(self, at=None, **kwargs):
    super().__init__(at, index=3, value=np.nan, **kwargs)


def ecg_resnet_lite(seed, *, length=256, classes=4, fault=None):
  """An ECG 1-D ResNet-lite (Hannun et al., 2019, the cardiologist-level arrhythmia network in
  miniature): a width-16 convolution of 32 (BN, ReLU), four pre-activation residual blocks
  (BN, ReLU, dropout 0.2, width-16 convolutions; 32, 32, 64, 64, subsampling by 2 every other
  block, max pooling on the shortcut), BN, ReLU, global average pooling, a `NaNOnceAt` (at its
  `fault`-th training call; None: never), Dense(`classes`): the logits."""
  _seed(seed)
  x = keras.Input((length, 1))
  h = L.ReLU()(L.BatchNormalization()(L.Conv1D(32, 16, padding='same')(x)))
  for i, n in enumerate((32, 32, 64, 64)):
    stride = 2 if i % 2 else 1
    r = L.ReLU()(L.BatchNormalization()(h))
    r = L.Conv1D(n, 16, strides=stride, padding='same')(r)
    r = L.Dropout(0.2)(L.ReLU()(L.BatchNormalization()(r)))
    r = L.Conv1D(n, 16, padding='same')(r)
    s = L.MaxPooling1D(stride, padding='same')(h) if stride > 1 else h
    if s.shape[-1] != n:
      s = L.Conv1D(n, 1)(s)
    h = L.Add()([s, r])
  h = L.GlobalAveragePooling1D()(L.ReLU()(L.BatchNormalization()(h)))
  return keras.Model(x, L.Dense(classes)(NaNOnceAt(fault)(h)), name='ecg_resnet_lite')


def concrete_mixes(seed, *, rows=2048):
  """Concrete mixes in miniature (Yeh's UCI concrete compressive-strength table): cement,
  blast-furnace slag, fly ash, water, superplasticiser, coarse and fine aggregate (kg per cubic
  metre) and age (days), standardised; the label the compressive strength in MPa (about 5 to
  90, rising with the binder-to-water ratio and the logarithm of the age). (features (rows, 8),
  strength (rows, 1))."""
  rng = np.random.RandomState(seed)
  cement = rng.uniform(100, 540, rows)
  slag = rng.uniform(0, 360, rows) * (rng.rand(rows) < 0.55)
  ash = rng.uniform(0, 200, rows) * (rng.rand(rows) < 0.45)
  water = rng.uniform(120, 250, rows)
  plasticiser = rng.uniform(0, 32, rows) * (rng.rand(rows) < 0.6)
  coarse = rng.uniform(800, 1150, rows)
  fine = rng.uniform(590, 990, rows)
  age = rng.choice([3, 7, 14, 28, 56, 90, 180, 365], rows)
  binder = cement + 0.6 * slag + 0.3 * ash
  y = (60 * np.log1p(age) / np.log(366) * (binder / water) / 2.2 + 0.3 * plasticiser +
       rng.normal(0, 4, rows))
  x = np.stack([cement, slag, ash, water, plasticiser, coarse, fine, age], 1)
  x = (x - x.mean(0)) / x.std(0)
  return x.astype(np.float32), y[:, None].astype(np.float32)


def concrete_dnn_lite(seed, *, features=8):
  """A concrete-strength DNN regressor (the deep Keras MLP of the threads' regressions): four
  Dense layers (128, 64, 32, 16; ReLU, Glorot-uniform kernels), no normalisation, Dense(1): the
  strength."""
  _seed(seed)
  x = keras.Input((features,))
  h = x
  for n in (128, 64, 32, 16):
    h = L.Dense(n, activation='relu')(h)
  return keras.Model(x, L.Dense(1)(h), name='concrete_dnn_lite')


def lenet_300_100_lite(seed, *, pixels=64, classes=10, init='glorot_uniform'):
  """A LeNet-300-100 (LeCun et al., 1998, the fully connected MNIST net): Flatten, Dense(300,
  ReLU), Dense(100, ReLU), Dense(`classes`): the logits; every kernel initialised with `init`
  (the threads' 'zeros'; Keras's default the remedy)."""
  _seed(seed)
  x = keras.Input((8, 8, 1))
  h = L.Flatten()(x)
  for n in (300, 100):
    h = L.Dense(n, activation='relu', kernel_initializer=init)(h)
  return keras.Model(x, L.Dense(classes, kernel_initializer=init)(h), name='lenet_300_100_lite')


def dna_coverage(seed, *, rows=2048, length=128, bins=8, factors=6):
  """Sequencing coverage of DNA in miniature (the Basenji task): one-hot DNA windows (`length`
  x 4) and the read counts of `bins` bins along them; each of `factors` transcription factors'
  6-base motif, where planted (probability 0.3 each), raises the coverage of its bin and its
  neighbours; the counts Poisson around that rate. (one-hot (rows, length, 4), counts (rows,
  bins))."""
  rng = np.random.RandomState(seed)
  motifs = rng.randint(0, 4, (factors, 6))
  gain = rng.uniform(1.0, 1.5, factors)
  seq = rng.randint(0, 4, (rows, length))
  width = length // bins
  log_rate = np.full((rows, bins), -0.5)
  for i in range(rows):
    for k in np.nonzero(rng.rand(factors) < 0.3)[0]:
      at = rng.randint(0, length - 6)
      seq[i, at:at + 6] = motifs[k]
      b = at // width
      log_rate[i, b] += gain[k]
      log_rate[i, max(b - 1, 0)] += 0.5 * gain[k]
      log_rate[i, min(b + 1, bins - 1)] += 0.5 * gain[k]
  counts = rng.poisson(np.exp(log_rate)).astype(np.float32)
  return np.eye(4, dtype=np.float32)[seq], counts


def poisson_nll(y, rate):
  """The Poisson negative log-likelihood as the threads write it: mean(rate - y log(rate)), on
  the predicted rate, with no epsilon (log(0) is -inf; 0 x -inf is NaN)."""
  y = tf.cast(y, rate.dtype)
  return tf.reduce_mean(rate - y * tf.math.log(rate))


def basenji_lite(seed, *, length=128, bins=8, activation='relu'):
  """A Basenji-lite (Kelley et al., 2018): a width-11 convolution of 32 (BN, ReLU), max pooling
  of 2, two width-5 convolutions of 48 (BN, ReLU) with max pooling of 2 and 4, two dilated
  width-3 residual convolutions of 48 (dilation 2 and 4; BN, ReLU), a width-1 convolution of 1
  per bin: each bin's predicted read count, through `activation` (the thread's 'relu', a count
  being non-negative; Basenji's softplus the remedy)."""
  _seed(seed)
  x = keras.Input((length, 4))
  h = L.ReLU()(L.BatchNormalization()(L.Conv1D(32, 11, padding='same')(x)))
  h = L.MaxPooling1D(2)(h)
  for pool in (2, 4):
    h = L.ReLU()(L.BatchNormalization()(L.Conv1D(48, 5, padding='same')(h)))
    h = L.MaxPooling1D(pool)(h)
  for rate in (2, 4):
    r = L.ReLU()(L.BatchNormalization()(L.Conv1D(48, 3, dilation_rate=rate,
                                                  padding='same')(h)))
    h = L.Add()([h, r])
  out = L.Conv1D(1, 1, activation=activation)(h)
  return keras.Model(x, L.Reshape((bins,))(out), name='basenji_lite')


def house_sales(seed, *, rows=2048):
  """House sales in miniature (the King County house-price table as the threads read it, raw
  columns): bedrooms, bathrooms, living area and lot area in square feet (the lot up to about
  a million), floors, grade, year built, latitude and longitude; the label the price in
  hundreds of thousands of dollars. (features (rows, 9), price (rows, 1))."""
  rng = np.random.RandomState(seed)
  bed = rng.randint(1, 7, rows)
  bath = np.round(rng.uniform(1, 4, rows) * 4) / 4
  living = rng.lognormal(7.55, 0.42, rows)
  lot = rng.lognormal(8.99, 0.9, rows)
  floors = rng.choice([1.0, 1.5, 2.0, 3.0], rows)
  grade = np.clip(np.round(3 + living / 400 + rng.normal(0, 1, rows)), 3, 13)
  year = rng.randint(1900, 2016, rows)
  lat = rng.uniform(47.15, 47.78, rows)
  lon = rng.uniform(-122.52, -121.31, rows)
  price = (0.25 * living / 1000 + 0.8 * (grade - 7) + 0.03 * np.log(lot) + 2.5 * (lat - 47.15) -
           0.3 * (lon + 122.52) + 0.1 * bath + 4.5 + rng.normal(0, 0.4, rows))
  x = np.stack([bed, bath, living, lot, floors, grade, year, lat, lon], 1)
  return x.astype(np.float32), price[:, None].astype(np.float32)


def dnn_regressor_lite(seed, x, *, dtype='float16'):
  """A DNN regressor (the canned tf.estimator.DNNRegressor's [64, 32] in Keras): a
  Normalization layer adapted to the features `x`, Dense(64, ReLU), Dense(32, ReLU), Dense(1):
  the price. Every layer in `dtype` ('float16': the threads' half-precision run, the raw
  features cast to float16 on the way in; 'float32' the remedy)."""
  _seed(seed)
  norm = L.Normalization(dtype=dtype)
  norm.adapt(x)
  inp = keras.Input((x.shape[1],))
  h = norm(inp)
  for n in (64, 32):
    h = L.Dense(n, activation='relu', dtype=dtype)(h)
  out = L.Dense(1, dtype=dtype)(h)
  return keras.Model(inp, L.Activation('linear', dtype='float32')(out), name='dnn_regressor_lite')


def cifar_quick_lite(seed, *, size=32, classes=10, softmax=False):
  """Caffe's cifar10_quick-lite (the Caffe CIFAR-10 example): three 5x5 convolutions (32, 32, 64;
  ReLU) each followed by 3x3 max pooling with stride 2, Dense(64), Dense(`classes`): the logits,
  or with `softmax` the probabilities."""
  _seed(seed)
  x = keras.Input((size, size, 3))
  h = x
  for n in (32, 32, 64):
    h = L.Conv2D(n, 5, padding='same', activation='relu')(h)
    h = L.MaxPooling2D(3, strides=2, padding='same')(h)
  h = L.Dense(64)(L.Flatten()(h))
  return keras.Model(x, L.Dense(classes, activation='softmax' if softmax else None)(h),
                     name='cifar_quick_lite')


# --- The scenarios. ---------------------------------------------------------------------------


@add('blind28_lr_overfeat_sgd', 'learning_rate', 'overfeat_lite', doors=('trainer', 'fit'),
     steps=150, citation='geifmany/cifar-vgg#1; keras-team/keras#12408')
def _(seed, cured=False):
  """Users training a plain (no batch normalisation) CNN from scratch with SGD at too high a
  learning rate (0.1, momentum 0.9) report a loss that sits at chance and accuracy that never rises;
  lowering the rate to 0.01 let it learn. The sick run: an OverFeat-lite on the digits at SGD
  0.1, its loss flat at about ln(10) and its error at chance; the cure (0.01) trains."""
  return cases.Setup(overfeat_lite(seed), keras.optimizers.SGD(0.01 if cured else 0.1,
                                                               momentum=0.9),
                     SCE(from_logits=True), data.digits_stream(seed, size=32), 'classes')


@add('blind28_lr_kws_adam', 'learning_rate', 'cnn_trad_fpool3_lite', doors=('trainer', 'fit'),
     steps=150, citation='OpenNMT/OpenNMT-py#805; rajveermalviya/language-modeling#3')
def _(seed, cured=False):
  """Users switching a recipe's optimizer to Adam kept the learning rate tuned for SGD (1.0) and
  report a loss that jumps and will not come down as it should; Adam's usual 1e-3 fixed it. The
  sick run: a cnn-trad-fpool3 keyword spotter under Adam at 1.0; the cure is Adam at 1e-3."""
  x, y = keyword_spectrograms(seed)
  return cases.Setup(cnn_trad_fpool3_lite(seed), keras.optimizers.Adam(1e-3 if cured else 1.0),
                     SCE(from_logits=True), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind28_exp_magic_wand_naive_softmax', 'softmax_overflow', 'magic_wand_lite',
     doors=('trainer', 'fit'), steps=200,
     citation='uTensor/uTensor#175; tensorflow/tensorflow#10142')
def _(seed, cured=False):
  """Users who wrote softmax as exp(z) / sum(exp(z)) report NaN as soon as the logits grow large
  (exp overflows to inf above about 88, and inf / inf is NaN); tf.nn.softmax, which subtracts
  the maximum, fixed it. The sick run: a magic-wand gesture CNN on raw milli-g accelerometer
  windows with the hand-written softmax, NaN from the first steps; the cure uses tf.nn.softmax."""
  x, y = wand_gestures(seed)
  return cases.Setup(magic_wand_lite(seed, naive=not cured), keras.optimizers.Adam(1e-3),
                     SCE(), data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind28_input_hybridsn_nodata_nan', 'bad_input', 'hybridsn_lite',
     doors=('trainer', 'fit'), steps=150, citation='NRCan/geo-deep-learning#68')
def _(seed, cured=False):
  """Users training on GeoTIFF imagery report NaN losses traced to the rasters' no-data pixels,
  read in as NaN and fed straight to the network; replacing them (with 0) fixed it. The sick
  run: a HybridSN-lite on hyperspectral patches of which 2 percent of the pixels are NaN, its
  weights and outputs NaN after the first update; the cure fills those pixels with 0."""
  x, y = hyperspectral_patches(seed, fill=cured)
  clean, yc = hyperspectral_patches(seed, fill=True)
  return cases.Setup(hybridsn_lite(seed), keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes',
                     eval_data=data.stream(clean, yc, batch=32, seed=seed))


@add('blind28_transient_ecg_resnet_glitch', 'transient', 'ecg_resnet_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='axolotl-ai-cloud/axolotl#2326; yxlijun/DSFD.pytorch#17')
def _(seed, cured=False):
  """Users report a run that trains normally and then shows a single NaN out of nowhere (a one-off
  NaN in a loss or gradient, not a steady divergence), after which everything is NaN unless the
  step is skipped. The sick run: an ECG 1-D ResNet-lite whose activations carry one NaN at its
  80th training call; the loss is healthy until then and NaN after; the cure has no glitch."""
  x, y = ecg_beats(seed)
  return cases.Setup(ecg_resnet_lite(seed, fault=None if cured else 80),
                     keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.stream(x, y, batch=32, seed=seed), 'classes')


@add('blind28_grad_concrete_dnn_sgd', 'exploding_gradients', 'concrete_dnn_lite',
     doors=('trainer', 'fit'), steps=150, citation='keras-team/keras#510; keras-team/keras#5127')
def _(seed, cured=False):
  """Users training a deep Keras MLP regressor with SGD (0.01, momentum 0.9, Nesterov) report a
  loss that turns NaN within the first epoch unless clipnorm is set; with gradient clipping the
  same model trains. The sick run: a four-hidden-layer ReLU DNN on standardised concrete mixes
  (strength in MPa, MSE), its loss going to inf and NaN within a few steps; the cure clipnorm=1."""
  x, y = concrete_mixes(seed)
  opt = keras.optimizers.SGD(0.01, momentum=0.9, nesterov=True, clipnorm=1.0 if cured else None)
  return cases.Setup(concrete_dnn_lite(seed), opt, 'mse', data.stream(x, y, batch=32, seed=seed),
                     'regression')


@add('blind28_init_lenet300_zeros', 'initialisation', 'lenet_300_100_lite',
     doors=('trainer', 'fit'), steps=150, citation='wagonhelm/NaNmnist#2; davharris/mistnet#87')
def _(seed, cured=False):
  """Users initialising every weight to zero report a network that never learns: every hidden unit
  computes the same thing and, behind zero weights, gets no gradient at all, so only the output
  bias moves. The sick run: a LeNet-300-100 on the digits with all kernels 'zeros', its loss
  flat at ln(10) and error at the constant's; the cure (Glorot-uniform kernels) trains."""
  model = lenet_300_100_lite(seed, init='glorot_uniform' if cured else 'zeros')
  return cases.Setup(model, keras.optimizers.Adam(1e-3), SCE(from_logits=True),
                     data.digits_stream(seed, size=8, rgb=False), 'classes')


@add('blind28_log_basenji_poisson_relu', 'division_or_log', 'basenji_lite',
     doors=('trainer', 'fit'), steps=200, citation='keras-team/keras#590; keras-team/keras#479')
def _(seed, cured=False):
  """Users fitting counts with the Poisson loss y_pred - y_true log(y_pred) report NaN losses when
  the prediction reaches 0 (log(0) is -inf), the loss being meant for a softplus output. The
  sick run: a Basenji-lite predicting binned read counts through a ReLU output with the loss
  written without an epsilon, NaN once a bin's rate hits 0; the cure is Basenji's softplus."""
  x, y = dna_coverage(seed)
  return cases.Setup(basenji_lite(seed, activation='softplus' if cured else 'relu'),
                     keras.optimizers.Adam(1e-3), poisson_nll,
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind28_fp16_dnn_regressor_raw_features', 'precision', 'dnn_regressor_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='tensorflow/tensorflow#56065; keras-team/keras#4032')
def _(seed, cured=False):
  """Users running Keras models in float16 report NaN outputs and losses that do not appear in
  float32: values above float16's largest (65504) become inf on the way in. The sick run: a DNN
  regressor in float16 on raw house-sale columns (a lot area up to about a million square feet),
  its loss NaN within the first steps; the cure runs the same model in float32."""
  x, y = house_sales(seed)
  return cases.Setup(dnn_regressor_lite(seed, x, dtype='float32' if cured else 'float16'),
                     keras.optimizers.Adam(1e-3), 'mse',
                     data.stream(x, y, batch=32, seed=seed), 'regression')


@add('blind28_mismatch_cifar_quick_logits_prob_loss', 'loss_output_mismatch', 'cifar_quick_lite',
     doors=('trainer', 'fit'), steps=150,
     citation='keras-team/keras#6587; TrickyGo/Dive-into-DL-TensorFlow2.0#64')
def _(seed, cured=False):
  """Users who dropped the softmax from the output layer but kept sparse_categorical_crossentropy
  with from_logits=False report a model that does not fit (the loss clips the raw logits as
  probabilities); adding the softmax (or from_logits=True) fixed it. The sick run: a Caffe
  cifar10_quick-lite with logits into that loss, its error at chance; the cure adds softmax."""
  return cases.Setup(cifar_quick_lite(seed, softmax=cured), keras.optimizers.Adam(1e-3),
                     'sparse_categorical_crossentropy', data.digits_stream(seed, size=32),
                     'classes')

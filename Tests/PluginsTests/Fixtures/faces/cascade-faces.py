#!/usr/bin/python3
"""Faces OpenCV 4.6's Haar cascades find (Debian's python3-opencv and opencv-data): the second
detector `redact` is checked against (FaceCropTests). Usage: cascade-faces.py FILE...
Prints {file: [[x, y, width, height], ...]} as JSON: what either of the frontal-face cascades
(default and alt2) finds, sensitively (3 neighbours, faces from 20 pixels), in upright pixels.
"""
import json
import sys

import cv2

CASCADES = [cv2.CascadeClassifier("/usr/share/opencv4/haarcascades/" + name)
            for name in ("haarcascade_frontalface_default.xml", "haarcascade_frontalface_alt2.xml")]
found = {}
for path in sys.argv[1:]:
    image = cv2.imread(path, cv2.IMREAD_GRAYSCALE)  # applies the EXIF orientation
    boxes = []
    for cascade in CASCADES:
        for x, y, w, h in cascade.detectMultiScale(image, scaleFactor=1.1, minNeighbors=3, minSize=(20, 20)):
            boxes.append([int(x), int(y), int(w), int(h)])
    found[path] = boxes
print(json.dumps(found))
